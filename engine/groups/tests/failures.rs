//! Membership under failure, simulated: five daemons' group services and
//! liveness (the same code mcastd runs), virtual time, seeded random
//! crashes, restarts, pauses and partitions, and client joins and leaves
//! throughout. After the last fault heals, the checker demands one
//! registry everybody agrees on, one agent per group, every member node
//! holding the agent's view, every client that wants to be a member being
//! one, the registry naming that number and agent, no node holding a view
//! or a populated agent role of a name under another number, and a fresh
//! join completing within a bound.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use common::{cluster, fresh, Faults, Rng, MS, N};
use mcast_groups::liveness::{LiveEvent, Liveness};
use mcast_groups::{GroupEvent, GroupService, Limits, MemberId, NodeId};

const NAMES: [&str; 3] = ["red", "green", "blue"];

struct Node {
    svc: GroupService,
    live: Liveness,
    up: bool,
    /// Frozen (SIGSTOP): up but neither hears nor speaks.
    paused_until: u64,
    /// Clients and the group they want to be in.
    wants: BTreeMap<MemberId, &'static str>,
    /// Join requests in flight: request -> member.
    joining: BTreeMap<u64, MemberId>,
    incarnation: u32,
}

/// Messages in flight on one directed link, in order: (deliver at, bytes).
type Link = VecDeque<(u64, Vec<u8>)>;

struct Sim {
    faults: Faults,
    rng: Rng,
    now: u64,
    nodes: Vec<Node>,
    /// In flight on each directed link, in order: (deliver at, bytes, sender incarnation).
    links: BTreeMap<(NodeId, NodeId), Link>,
    /// Side of each node while partitioned (None: no partition).
    side: Option<Vec<bool>>,
    next_member: MemberId,
    next_req: u64,
    /// Clients whose join failed, to try again.
    retry: Vec<(NodeId, MemberId)>,
    /// No new client joins or leaves (before the check).
    quiet: bool,
}

impl Sim {
    fn new(seed: u64, faults: Faults) -> Sim {
        let nodes = (1..=N)
            .map(|n| {
                let (svc, live) = fresh(n, 1, 0);
                Node {
                    svc,
                    live,
                    up: true,
                    paused_until: 0,
                    wants: BTreeMap::new(),
                    joining: BTreeMap::new(),
                    incarnation: 1,
                }
            })
            .collect();
        Sim {
            faults,
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            now: 0,
            nodes,
            links: BTreeMap::new(),
            side: None,
            next_member: 1,
            next_req: 1,
            retry: Vec::new(),
            quiet: false,
        }
    }

    fn n(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    fn active(&self, id: NodeId) -> bool {
        let n = &self.nodes[id as usize - 1];
        n.up && self.now >= n.paused_until
    }

    fn connected(&self, a: NodeId, b: NodeId) -> bool {
        self.side
            .as_ref()
            .is_none_or(|s| s[a as usize - 1] == s[b as usize - 1])
    }

    /// One millisecond.
    fn step(&mut self, faults: bool) {
        self.now += MS;
        if std::env::var("MCAST_FAILURE_TRACE").is_ok() && self.now % (100 * MS) == 0 {
            let queued: usize = self.links.values().map(|l| l.len()).sum();
            eprintln!("t={}ms queued={queued}", self.now / MS);
        }
        if faults {
            self.fault();
        }
        self.clients(!self.quiet);
        // Deliver link messages that are due (held while partitioned: the
        // reliable links retransmit until the partition heals).
        let keys: Vec<(NodeId, NodeId)> = self.links.keys().copied().collect();
        for (from, to) in keys {
            if !self.active(to) || !self.connected(from, to) {
                continue;
            }
            loop {
                let q = self.links.get_mut(&(from, to)).expect("listed");
                match q.front() {
                    Some((at, _)) if *at <= self.now => {}
                    _ => break,
                }
                let (_, bytes) = q.pop_front().expect("peeked");
                let now = self.now;
                let mut ev = Vec::new();
                let node = self.n(to);
                node.live.heard(from, now, &mut ev);
                let _ = node.svc.handle_message(from, &bytes);
                self.live_events(to, ev);
            }
        }
        for id in 1..=N {
            if !self.active(id) {
                continue;
            }
            let now = self.now;
            let mut ev = Vec::new();
            let node = self.n(id);
            node.svc.tick(now);
            let reg = node.svc.registry_epoch();
            node.live.poll(now, reg, &mut ev);
            self.live_events(id, ev);
            self.pump(id);
        }
    }

    fn live_events(&mut self, id: NodeId, events: Vec<LiveEvent>) {
        for e in events {
            match e {
                LiveEvent::Send { to, payload } => {
                    // Beats are unreliable and immediate (a LAN).
                    if self.active(to) && self.connected(id, to) {
                        let now = self.now;
                        let mut ev = Vec::new();
                        let target = self.n(to);
                        let reg = target.svc.registry_epoch();
                        target.live.on_beat(id, &payload, now, reg, &mut ev);
                        self.live_events(to, ev);
                    }
                }
                LiveEvent::Suspect(_) => {}
                LiveEvent::Failed(n) => {
                    self.n(id).svc.node_failed(n);
                    self.links.remove(&(id, n)); // the link is reset
                }
                LiveEvent::Restarted(n) => {
                    let node = self.n(id);
                    node.svc.node_failed(n);
                    node.svc.node_recovered(n);
                    self.links.remove(&(id, n));
                }
                LiveEvent::Recovered(n) => self.n(id).svc.node_recovered(n),
                LiveEvent::Registry { node, epoch } => self.n(id).svc.adopt_registry(node, epoch),
                LiveEvent::Majority => self.n(id).svc.confirm_registry(),
                LiveEvent::Rejoin { .. } => self.rejoin(id),
            }
            self.pump(id);
        }
    }

    /// As mcastd does when told it was declared failed.
    fn rejoin(&mut self, id: NodeId) {
        let now = self.now;
        let node = self.n(id);
        node.live.rejoined();
        node.incarnation = node.live.incarnation();
        let registry = node.svc.registry_epoch();
        let mut svc = GroupService::new(id, 1, Limits::default());
        svc.set_cluster(&cluster());
        svc.adopt_registry(registry.0, registry.1);
        svc.confirm_registry();
        node.svc = svc;
        node.joining.clear();
        let wants: Vec<(MemberId, &str)> = node.wants.iter().map(|(&m, &g)| (m, g)).collect();
        for (m, g) in wants {
            let req = self.next_req;
            self.next_req += 1;
            let node = self.n(id);
            node.joining.insert(req, m);
            node.svc.join(req, m, g);
        }
        let _ = now;
        for peer in 1..=N {
            self.links.remove(&(id, peer));
        }
    }

    /// Moves what a service wants sent onto the links; handles its events.
    fn pump(&mut self, id: NodeId) {
        while let Some((to, bytes)) = self.n(id).svc.poll_send() {
            let delay = (1 + self.rng.below(3)) * MS;
            let q = self.links.entry((id, to)).or_default();
            let at = q.back().map_or(0, |b| b.0).max(self.now + delay);
            q.push_back((at, bytes));
        }
        while let Some(e) = self.n(id).svc.poll_event() {
            let node = self.n(id);
            match e {
                GroupEvent::Joined { req, .. } => {
                    node.joining.remove(&req);
                }
                GroupEvent::Failed { req, .. } => {
                    // The application is told and tries again.
                    if let Some(m) = node.joining.remove(&req) {
                        if node.wants.contains_key(&m) {
                            self.retry.push((id, m));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Retries failed joins and, if `new`, starts random joins and leaves.
    fn clients(&mut self, new: bool) {
        for (id, m) in std::mem::take(&mut self.retry) {
            if !self.active(id) {
                self.retry.push((id, m));
                continue;
            }
            let Some(&g) = self.n(id).wants.get(&m) else {
                continue;
            };
            let req = self.next_req;
            self.next_req += 1;
            let node = self.n(id);
            node.joining.insert(req, m);
            node.svc.join(req, m, g);
            self.pump(id);
        }
        if !new || !self.rng.chance(20) {
            return;
        }
        let id = 1 + self.rng.below(u64::from(N)) as NodeId;
        if !self.active(id) {
            return;
        }
        let leave = self.rng.chance(300);
        let node_wants: Vec<(MemberId, &'static str)> =
            self.n(id).wants.iter().map(|(&m, &g)| (m, g)).collect();
        if leave && !node_wants.is_empty() {
            let (m, _) = node_wants[self.rng.below(node_wants.len() as u64) as usize];
            let node = self.n(id);
            node.wants.remove(&m);
            node.joining.retain(|_, j| *j != m); // its requests get no answer
            node.svc.member_gone(m);
        } else {
            let g = NAMES[self.rng.below(NAMES.len() as u64) as usize];
            let m = self.next_member;
            self.next_member += 1;
            let req = self.next_req;
            self.next_req += 1;
            let node = self.n(id);
            node.wants.insert(m, g);
            node.joining.insert(req, m);
            node.svc.join(req, m, g);
        }
        self.pump(id);
    }

    fn fault(&mut self) {
        let r = self.rng.below(1000);
        let id = 1 + self.rng.below(u64::from(N)) as NodeId;
        let up = self.nodes.iter().filter(|n| n.up).count();
        match r {
            // Crash: at most two down at once.
            0..=2 if self.faults.crashes && self.n(id).up && up > 3 => {
                let node = self.n(id);
                node.up = false;
                node.wants.clear();
                node.joining.clear();
                self.links.retain(|&(a, b), _| a != id && b != id);
            }
            // Restart a crashed node: a fresh daemon, a new incarnation.
            3..=6 if !self.n(id).up => self.restart(id),
            // Pause (SIGSTOP) for 50..800 ms.
            7..=8 if self.faults.pauses && self.active(id) => {
                let d = (50 + self.rng.below(750)) * MS;
                let now = self.now;
                self.n(id).paused_until = now + d;
            }
            // Partition one or two nodes off, or heal.
            9 if self.faults.partitions && self.side.is_none() => {
                let mut side = vec![false; N as usize];
                side[id as usize - 1] = true;
                if self.rng.chance(500) {
                    side[self.rng.below(u64::from(N)) as usize] = true;
                }
                self.side = Some(side);
            }
            10..=12 if self.side.is_some() => self.side = None,
            _ => {}
        }
    }

    fn restart(&mut self, id: NodeId) {
        let now = self.now;
        let node = self.n(id);
        node.incarnation += 10;
        let (svc, live) = fresh(id, node.incarnation, now);
        node.svc = svc;
        node.live = live;
        node.up = true;
        node.paused_until = 0;
    }

    /// Heals everything and runs quietly for `ms`.
    fn settle(&mut self, ms: u64) {
        self.side = None;
        for id in 1..=N {
            if !self.n(id).up {
                self.restart(id);
            }
            self.n(id).paused_until = 0;
        }
        for _ in 0..ms {
            self.step(false);
        }
    }

    fn check(&mut self, seed: u64) {
        let registries: BTreeSet<NodeId> = self
            .nodes
            .iter()
            .map(|n| n.svc.registry_epoch().0)
            .collect();
        assert_eq!(
            registries.len(),
            1,
            "seed {seed}: registries {registries:?}"
        );
        // Every name's number, as its member nodes know it: one each, and
        // no two names sharing one.
        let mut numbers: BTreeMap<u32, &str> = BTreeMap::new();
        for name in NAMES {
            let members: Vec<(NodeId, MemberId)> = self
                .nodes
                .iter()
                .enumerate()
                .flat_map(|(i, n)| {
                    n.wants
                        .iter()
                        .filter(move |(_, &g)| g == name)
                        .map(move |(&m, _)| (i as NodeId + 1, m))
                })
                .collect();
            if members.is_empty() {
                continue;
            }
            // The group's number, as its member nodes know it.
            let groups: BTreeSet<u32> = members
                .iter()
                .flat_map(|&(n, _)| {
                    self.nodes[n as usize - 1]
                        .svc
                        .local_groups()
                        .filter(|(_, g)| *g == name)
                        .map(|(id, _)| id)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(
                groups.len(),
                1,
                "seed {seed}: {name} has numbers {groups:?}"
            );
            let g = *groups.first().expect("one");
            if let Some(other) = numbers.insert(g, name) {
                panic!("seed {seed}: {other} and {name} share number {g}");
            }
            let agents: Vec<NodeId> = (1..=N)
                .filter(|&n| {
                    self.nodes[n as usize - 1]
                        .svc
                        .named_agent_view(g, name)
                        .is_some_and(|v| !v.members.is_empty())
                })
                .collect();
            assert_eq!(agents.len(), 1, "seed {seed}: {name} has agents {agents:?}");
            let view = self.nodes[agents[0] as usize - 1]
                .svc
                .named_agent_view(g, name)
                .expect("agent")
                .clone();
            // Every client that wants to be a member and has no request in
            // flight is one, and nobody else (anti-entropy restores lost
            // memberships and drops stale ones). No seed of 0..16000 fails
            // it (MCAST_FAILURE_SEEDS=16000, release); MCAST_FAILURE_LAX=1
            // skips this part, for hunting other faults.
            if std::env::var("MCAST_FAILURE_LAX").is_err() {
                // A member whose join is still in flight may be in or out.
                let settled = |&(n, m): &(NodeId, MemberId)| {
                    let node = &self.nodes[n as usize - 1];
                    !node.joining.values().any(|&j| j == m) && !self.retry.contains(&(n, m))
                };
                let mut want: Vec<(NodeId, MemberId)> =
                    members.iter().copied().filter(settled).collect();
                want.sort();
                let mut got: Vec<(NodeId, MemberId)> = view
                    .members
                    .iter()
                    .map(|m| (m.node, m.member))
                    .filter(settled)
                    .collect();
                got.sort();
                assert_eq!(
                    got, want,
                    "seed {seed}: {name}'s view at agent {}",
                    agents[0]
                );
            }
            for n in view.nodes() {
                let v = self.nodes[n as usize - 1].svc.named_view(g, name);
                assert_eq!(v, Some(&view), "seed {seed}: node {n}'s view of {name}");
            }
            // The registry knows the name under that number, with that agent.
            let registry = self.nodes[*registries.first().expect("one") as usize - 1]
                .svc
                .registry_groups();
            assert!(
                registry
                    .iter()
                    .any(|e| e.group == g && e.name == name && e.agent == agents[0]),
                "seed {seed}: the registry's entry of {name}: {registry:?}"
            );
        }
        // No node holds a view, or an agent role with members, of a name
        // under a number the checks above did not find for it.
        for (i, node) in self.nodes.iter().enumerate() {
            let n = i as NodeId + 1;
            for (g, name) in node.svc.local_groups() {
                assert_eq!(
                    numbers.get(&g),
                    Some(&name),
                    "seed {seed}: node {n} holds a view of {name} under {g}"
                );
            }
            for (g, name) in node.svc.named_agent_groups() {
                let v = node.svc.named_agent_view(g, name).expect("listed");
                assert!(
                    v.members.is_empty() || numbers.get(&g) == Some(&name),
                    "seed {seed}: node {n} is the agent of {name} under {g} with members"
                );
            }
        }
        // Progress: a new join anywhere completes within 100 ms.
        let req = self.next_req;
        self.next_req += 1;
        let m = self.next_member;
        self.next_member += 1;
        let node = self.n(3);
        node.wants.insert(m, "red");
        node.joining.insert(req, m);
        node.svc.join(req, m, "red");
        self.pump(3);
        for _ in 0..100 {
            self.step(false);
            if !self.n(3).joining.contains_key(&req) {
                return;
            }
        }
        panic!("seed {seed}: a join after the faults did not complete in 100 ms");
    }
}

/// One seed's faults, then healing: the state the checker looks at.
fn play(seed: u64, faults: Faults) -> Sim {
    let mut sim = Sim::new(seed, faults);
    // Everyone hears everyone first (a cluster that came up).
    sim.settle(200);
    for _ in 0..4000 {
        sim.step(true);
    }
    sim.settle(2000);
    // The clients stop joining and leaving; what is in flight ends.
    sim.quiet = true;
    sim.settle(1000);
    sim
}

fn run(faults: Faults, default_seeds: u64) {
    let seeds: u64 = std::env::var("MCAST_FAILURE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_seeds);
    // Every seed runs; the failures are listed together.
    let mut failed = Vec::new();
    let first: u64 = std::env::var("MCAST_FAILURE_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds {
        if std::env::var("MCAST_FAILURE_TRACE").is_ok() {
            eprintln!("seed {seed}");
        }
        let outcome = std::panic::catch_unwind(|| play(seed, faults).check(seed));
        if let Err(e) = outcome {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(why);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Crashes and restarts of any node (registry and agents included).
#[test]
fn random_crashes_and_restarts_end_with_one_agent_and_agreeing_views() {
    run(
        Faults {
            crashes: true,
            pauses: false,
            partitions: false,
        },
        100,
    );
}

/// Pauses (SIGSTOP) of 50-800 ms: past the detection bound the node is
/// evicted and rejoins.
#[test]
fn random_pauses_end_with_one_agent_and_agreeing_views() {
    run(
        Faults {
            crashes: false,
            pauses: true,
            partitions: false,
        },
        100,
    );
}

/// Every fault at once.
#[test]
fn random_crashes_restarts_pauses_and_partitions_end_with_one_agent_and_agreeing_views() {
    run(
        Faults {
            crashes: true,
            pauses: true,
            partitions: true,
        },
        100,
    );
}

/// Prints the end state of one seed (MCAST_FAILURE_FIRST_SEED, all faults).
#[test]
#[ignore = "a debugging aid"]
fn debug_end_state() {
    let seed: u64 = std::env::var("MCAST_FAILURE_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let all = std::env::var("MCAST_FAILURE_CRASHES_ONLY").is_err();
    let pauses_only = std::env::var("MCAST_FAILURE_PAUSES_ONLY").is_ok();
    let sim = play(
        seed,
        Faults {
            crashes: !pauses_only,
            pauses: all,
            partitions: all && !pauses_only,
        },
    );
    for n in 1..=N {
        let svc = &sim.nodes[n as usize - 1].svc;
        println!("node {n}: registry {:?}", svc.registry_epoch());
        for (g, name) in svc.local_groups() {
            let v = svc.named_view(g, name).unwrap();
            println!(
                "  member of {g} {name} agent {} epoch {:#x} members {}",
                v.agent,
                v.epoch,
                v.members.len()
            );
        }
        for (g, name) in svc.named_agent_groups() {
            let v = svc.named_agent_view(g, name).unwrap();
            println!(
                "  agent of {g} {} epoch {:#x} members {}",
                v.name,
                v.epoch,
                v.members.len()
            );
        }
        if let Ok(d) = std::env::var("MCAST_FAILURE_DUMP") {
            if d.parse::<NodeId>().ok() == Some(n) {
                let node = &sim.nodes[n as usize - 1];
                println!("wants {:?} joining {:?}", node.wants, node.joining);
                println!("{svc:#?}");
            }
        }
        for e in svc.registry_groups() {
            println!(
                "  registry: {} {} agent {} members {}",
                e.group, e.name, e.agent, e.members
            );
        }
    }
}
