//! Membership under failure, simulated: five daemons' group services and
//! liveness (the same code mcastd runs), virtual time, seeded random
//! crashes, restarts, pauses and partitions, and client joins and leaves
//! throughout. After the last fault heals, the checker demands one
//! registry everybody agrees on, one agent per group, every member node
//! holding the agent's view, every client that wants to be a member being
//! one, the registry naming that number and agent, no node holding a view
//! or a populated agent role of a name under another number, and a fresh
//! join completing within a bound. Throughout, a node that takes a role on
//! a verdict (an agent's or the registry's) must hear a strict majority of
//! the cluster: a node cut off alone once took roles while it declared its
//! silent peers failed one by one.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use common::{
    env_u64, fresh, panic_text, pick_fault, rejoined_service, Churn, ClientHost, Clients, Fault,
    Faults, Rng, EVERY_FAULT, MS, N,
};
use mcast_groups::detector::DetectorConfig;
use mcast_groups::liveness::{LiveEvent, Liveness};
use mcast_groups::{GroupService, MemberId, NodeId};

const NAMES: [&str; 3] = ["red", "green", "blue"];

struct Node {
    svc: GroupService,
    live: Liveness,
    up: bool,
    /// Frozen (SIGSTOP): up but neither hears nor speaks.
    paused_until: u64,
    clients: Clients,
    incarnation: u32,
}

/// Messages in flight on one directed link, in order: (deliver at, bytes).
type Link = VecDeque<(u64, Vec<u8>)>;

struct Sim {
    seed: u64,
    faults: Faults,
    rng: Rng,
    now: u64,
    nodes: Vec<Node>,
    /// In flight on each directed link, in order: (deliver at, bytes, sender incarnation).
    links: BTreeMap<(NodeId, NodeId), Link>,
    /// Side of each node while partitioned (None: no partition).
    side: Option<Vec<bool>>,
    churn: Churn,
    /// No new client joins or leaves (before the check).
    quiet: bool,
    /// When each node last got anything (a beat or a link message) from
    /// each peer: (to, from) → ns. None since (re)start: not seen yet.
    heard: BTreeMap<(NodeId, NodeId), u64>,
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
                    clients: Clients::default(),
                    incarnation: 1,
                }
            })
            .collect();
        Sim {
            seed,
            faults,
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            now: 0,
            nodes,
            links: BTreeMap::new(),
            side: None,
            churn: Churn::new(&NAMES, 20, 300),
            quiet: false,
            heard: BTreeMap::new(),
        }
    }

    fn n(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize - 1]
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
        self.clients_step(!self.quiet);
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
                self.heard.insert((to, from), now);
                let node = self.n(to);
                // A link message shows an alive or suspect peer alive; a
                // failed one recovers only by its beat.
                node.live.heard(from, now);
                let _ = node.svc.handle_message(from, &bytes);
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
            // As mcastd: the doubts after each poll (a role left on a
            // failed node may be taken here) and before each verdict.
            let before = self.roles(id);
            self.doubts(id);
            self.alone(id, before, "once its doubts cleared");
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
                        self.heard.insert((to, id), now);
                        let mut ev = Vec::new();
                        let target = self.n(to);
                        let reg = target.svc.registry_epoch();
                        target.live.on_beat(id, &payload, now, reg, &mut ev);
                        self.live_events(to, ev);
                    }
                }
                LiveEvent::Suspect(_) => {}
                LiveEvent::Failed(n) => {
                    self.doubts(id);
                    let before = self.roles(id);
                    self.n(id).svc.node_failed(n);
                    self.alone(id, before, &format!("declaring node {n} failed"));
                    self.links.remove(&(id, n)); // the link is reset
                }
                LiveEvent::Restarted(n) => {
                    self.doubts(id);
                    let before = self.roles(id);
                    let node = self.n(id);
                    node.svc.node_failed(n);
                    node.svc.node_recovered(n);
                    self.alone(id, before, &format!("seeing node {n} restarted"));
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

    /// Hands node `id`'s group service its detector's doubts now.
    fn doubts(&mut self, id: NodeId) {
        let now = self.now;
        let node = self.n(id);
        let doubted: Vec<NodeId> = node.live.doubted(now).collect();
        node.svc.set_doubted(doubted);
    }

    /// The role moves node `id` has made: agent roles taken, registry moves.
    fn roles(&self, id: NodeId) -> (u64, u64) {
        let svc = &self.nodes[id as usize - 1].svc;
        (svc.takeovers(), svc.registry_moves())
    }

    /// Checker: if node `id` took a role since `before`, it heard a strict
    /// majority of the cluster (itself, and each peer it got something from
    /// within the detector's silence bound, or has not seen since its
    /// start: such a peer is never suspected).
    fn alone(&self, id: NodeId, before: (u64, u64), when: &str) {
        let after = self.roles(id);
        if after.0 <= before.0 && after.1 <= before.1 {
            return;
        }
        let cfg = DetectorConfig::default();
        // Plus a step's slack: the doubts are those of the last poll.
        let silence = u64::from(cfg.suspect_after) * cfg.interval + 2 * MS;
        let heard = (1..=N)
            .filter(|&j| {
                j == id
                    || self
                        .heard
                        .get(&(id, j))
                        .is_none_or(|&t| self.now - t < silence)
            })
            .count();
        let seed = self.seed;
        assert!(
            heard as u64 * 2 > N as u64,
            "seed {seed}: node {id} took a role {when} at {} ms hearing only {heard} of {N} nodes \
             (agent roles {} -> {}, registry moves {} -> {}); replay: \
             MCAST_FAILURE_FIRST_SEED={seed} MCAST_FAILURE_SEEDS=1 cargo test --release -p mcast-groups --test failures",
            self.now / MS,
            before.0,
            after.0,
            before.1,
            after.1
        );
    }

    /// As mcastd does when told it was declared failed.
    fn rejoin(&mut self, id: NodeId) {
        let node = self.n(id);
        node.live.rejoined();
        node.incarnation = node.live.incarnation();
        node.svc = rejoined_service(id, node.svc.registry_epoch(), true, false);
        self.join_all_again(id);
        for peer in 1..=N {
            self.links.remove(&(id, peer));
        }
    }

    fn fault(&mut self) {
        let nodes = &self.nodes;
        let now = self.now;
        let up = |id: NodeId| nodes[id as usize - 1].up;
        let active = |id: NodeId| up(id) && now >= nodes[id as usize - 1].paused_until;
        let fault = pick_fault(&mut self.rng, self.faults, up, active, self.side.is_some());
        match fault {
            Some(Fault::Crash(id)) => {
                let node = self.n(id);
                node.up = false;
                node.clients.clear();
                self.links.retain(|&(a, b), _| a != id && b != id);
            }
            Some(Fault::Restart(id)) => self.restart(id),
            Some(Fault::Pause(id, d)) => self.n(id).paused_until = now + d,
            Some(Fault::Partition(side)) => self.side = Some(side),
            Some(Fault::Heal) => self.side = None,
            None => {}
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
        self.heard.retain(|&(to, _), _| to != id);
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
                    n.clients
                        .wants
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
                    !node.clients.joining.values().any(|&j| j == m)
                        && !self.churn.retry.contains(&(n, m))
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
        let (_, req) = self.join_new(3, "red");
        self.pump(3);
        for _ in 0..100 {
            self.step(false);
            if !self.n(3).clients.joining.contains_key(&req) {
                return;
            }
        }
        panic!("seed {seed}: a join after the faults did not complete in 100 ms");
    }
}

/// One seed's faults, then healing: the state the checker looks at.
impl ClientHost for Sim {
    fn churn(&mut self) -> &mut Churn {
        &mut self.churn
    }

    fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    fn active(&self, id: NodeId) -> bool {
        let n = &self.nodes[id as usize - 1];
        n.up && self.now >= n.paused_until
    }

    fn node_clients(&mut self, id: NodeId) -> (&mut Clients, &mut GroupService) {
        let n = &mut self.nodes[id as usize - 1];
        (&mut n.clients, &mut n.svc)
    }

    fn pump(&mut self, id: NodeId) {
        while let Some((to, bytes)) = self.n(id).svc.poll_send() {
            let delay = (1 + self.rng.below(3)) * MS;
            let q = self.links.entry((id, to)).or_default();
            let at = q.back().map_or(0, |b| b.0).max(self.now + delay);
            q.push_back((at, bytes));
        }
        while let Some(e) = self.n(id).svc.poll_event() {
            self.join_answered(id, &e);
        }
    }
}

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
    let seeds = env_u64("MCAST_FAILURE_SEEDS", default_seeds);
    // Every seed runs; the failures are listed together.
    let mut failed = Vec::new();
    let first = env_u64("MCAST_FAILURE_FIRST_SEED", 0);
    for seed in first..first + seeds {
        if std::env::var("MCAST_FAILURE_TRACE").is_ok() {
            eprintln!("seed {seed}");
        }
        let outcome = std::panic::catch_unwind(|| play(seed, faults).check(seed));
        if let Err(e) = outcome {
            failed.push(panic_text(&*e));
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
    run(EVERY_FAULT, 100);
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
                println!(
                    "wants {:?} joining {:?}",
                    node.clients.wants, node.clients.joining
                );
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
