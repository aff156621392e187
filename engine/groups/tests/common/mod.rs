//! What the failure simulations share (`failures.rs`, `datapath.rs`): the
//! cluster, a fresh daemon's group service and liveness, the generator,
//! the faults a run injects and the clients that come and go.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use mcast_groups::detector::DetectorConfig;
use mcast_groups::liveness::Liveness;
use mcast_groups::{GroupEvent, GroupService, Limits, MemberId, NodeId};

/// Nodes in the cluster, numbered 1..=N; node 1 is the configured registry.
pub const N: u32 = 5;
/// One millisecond of virtual time, in ns.
pub const MS: u64 = 1_000_000;

/// xorshift64: the simulations' only source of randomness.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Which faults a run injects.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub crashes: bool,
    pub pauses: bool,
    pub partitions: bool,
}

/// Every fault: crashes and restarts, pauses, partitions.
pub const EVERY_FAULT: Faults = Faults {
    crashes: true,
    pauses: true,
    partitions: true,
};

pub fn cluster() -> Vec<NodeId> {
    (1..=N).collect()
}

/// A daemon just started: its group service and liveness.
pub fn fresh(node: NodeId, incarnation: u32, now: u64) -> (GroupService, Liveness) {
    let mut svc = GroupService::new(node, 1, Limits::default());
    svc.set_cluster(&cluster());
    let peers: Vec<NodeId> = cluster().into_iter().filter(|&n| n != node).collect();
    let live = Liveness::new(incarnation, &peers, DetectorConfig::default(), now);
    (svc, live)
}

/// The panic message of a caught panic.
pub fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A number from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A node's clients: the group each wants to be in, and its joins in flight.
#[derive(Debug, Default)]
pub struct Clients {
    pub wants: BTreeMap<MemberId, &'static str>,
    /// Join requests in flight: request -> member.
    pub joining: BTreeMap<u64, MemberId>,
    /// Clients that never leave while their daemon lives.
    pub permanent: BTreeSet<MemberId>,
}

impl Clients {
    /// Their daemon died, and they with it.
    pub fn clear(&mut self) {
        self.wants.clear();
        self.joining.clear();
        self.permanent.clear();
    }
}

/// How clients come and go across the cluster, and their numbering.
#[derive(Debug)]
pub struct Churn {
    pub next_member: MemberId,
    pub next_req: u64,
    /// Clients whose join failed, to try again: (node, member).
    pub retry: Vec<(NodeId, MemberId)>,
    names: &'static [&'static str],
    /// Chance (per mille) per step of a client joining or leaving somewhere.
    per_mille: u64,
    /// Of those, the chance (per mille) of a leave.
    leave_per_mille: u64,
}

impl Churn {
    pub fn new(names: &'static [&'static str], per_mille: u64, leave_per_mille: u64) -> Churn {
        Churn {
            next_member: 1,
            next_req: 1,
            retry: Vec::new(),
            names,
            per_mille,
            leave_per_mille,
        }
    }

    pub fn req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req - 1
    }

    pub fn member(&mut self) -> MemberId {
        self.next_member += 1;
        self.next_member - 1
    }
}

/// What a simulation gives its clients: the nodes' clients and group
/// services, the generator, and the pump that carries what a service
/// sends. The provided methods are the clients' behaviour, as an
/// application on mcastd would have it.
pub trait ClientHost {
    fn churn(&mut self) -> &mut Churn;
    fn rng(&mut self) -> &mut Rng;
    /// Up and not paused.
    fn active(&self, id: NodeId) -> bool;
    fn node_clients(&mut self, id: NodeId) -> (&mut Clients, &mut GroupService);
    /// Moves what node `id`'s service wants sent onto the links; handles
    /// its events.
    fn pump(&mut self, id: NodeId);

    /// Client `m` of node `id` asks to join `g` (again): the request.
    fn join_as(&mut self, id: NodeId, m: MemberId, g: &'static str) -> u64 {
        let req = self.churn().req();
        let (c, svc) = self.node_clients(id);
        c.wants.insert(m, g);
        c.joining.insert(req, m);
        svc.join(req, m, g);
        req
    }

    /// A new client of node `id` joins `g`: its member id and request.
    fn join_new(&mut self, id: NodeId, g: &'static str) -> (MemberId, u64) {
        let m = self.churn().member();
        (m, self.join_as(id, m, g))
    }

    /// Node `id`'s service was made anew (a rejoin): every client joins again.
    fn join_all_again(&mut self, id: NodeId) {
        let (c, _) = self.node_clients(id);
        c.joining.clear();
        let wants: Vec<(MemberId, &'static str)> = c.wants.iter().map(|(&m, &g)| (m, g)).collect();
        for (m, g) in wants {
            self.join_as(id, m, g);
        }
    }

    /// A join was answered: a failed one is tried again (the application
    /// is told and asks again).
    fn join_answered(&mut self, id: NodeId, e: &GroupEvent) {
        let (c, _) = self.node_clients(id);
        match *e {
            GroupEvent::Joined { req, .. } => {
                c.joining.remove(&req);
            }
            GroupEvent::Failed { req, .. } => {
                if let Some(m) = c.joining.remove(&req) {
                    if c.wants.contains_key(&m) {
                        self.churn().retry.push((id, m));
                    }
                }
            }
            _ => {}
        }
    }

    /// Retries failed joins and, if `new`, starts a random join or a leave
    /// of a client that is not permanent.
    fn clients_step(&mut self, new: bool) {
        for (id, m) in std::mem::take(&mut self.churn().retry) {
            if !self.active(id) {
                self.churn().retry.push((id, m));
                continue;
            }
            let Some(&g) = self.node_clients(id).0.wants.get(&m) else {
                continue;
            };
            self.join_as(id, m, g);
            self.pump(id);
        }
        let per_mille = self.churn().per_mille;
        if !new || !self.rng().chance(per_mille) {
            return;
        }
        let id = 1 + self.rng().below(u64::from(N)) as NodeId;
        if !self.active(id) {
            return;
        }
        let (c, _) = self.node_clients(id);
        let leavable: Vec<MemberId> = c
            .wants
            .keys()
            .copied()
            .filter(|m| !c.permanent.contains(m))
            .collect();
        let leave_per_mille = self.churn().leave_per_mille;
        if self.rng().chance(leave_per_mille) && !leavable.is_empty() {
            let m = leavable[self.rng().below(leavable.len() as u64) as usize];
            let (c, svc) = self.node_clients(id);
            c.wants.remove(&m);
            c.joining.retain(|_, j| *j != m); // its requests get no answer
            svc.member_gone(m);
        } else {
            let names = self.churn().names;
            let g = names[self.rng().below(names.len() as u64) as usize];
            self.join_new(id, g);
        }
        self.pump(id);
    }
}

/// A fault to inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The daemon dies with its clients.
    Crash(NodeId),
    /// A crashed node's daemon starts again: a new incarnation.
    Restart(NodeId),
    /// Frozen (SIGSTOP) for this long (ns).
    Pause(NodeId, u64),
    /// Each node's side: one or two nodes cut off from the rest.
    Partition(Vec<bool>),
    Heal,
}

/// Draws this step's fault, if any: `up` and `active` say which nodes are
/// up and which are neither down nor paused, `partitioned` whether a
/// partition holds.
pub fn pick_fault(
    rng: &mut Rng,
    faults: Faults,
    up: impl Fn(NodeId) -> bool,
    active: impl Fn(NodeId) -> bool,
    partitioned: bool,
) -> Option<Fault> {
    let r = rng.below(1000);
    let id = 1 + rng.below(u64::from(N)) as NodeId;
    let up_count = (1..=N).filter(|&n| up(n)).count();
    match r {
        // Crash: at most two down at once.
        0..=2 if faults.crashes && up(id) && up_count > 3 => Some(Fault::Crash(id)),
        3..=6 if !up(id) => Some(Fault::Restart(id)),
        // Pause for 50..800 ms.
        7..=8 if faults.pauses && active(id) => Some(Fault::Pause(id, (50 + rng.below(750)) * MS)),
        // Partition one or two nodes off, or heal.
        9 if faults.partitions && !partitioned => {
            let mut side = vec![false; N as usize];
            side[id as usize - 1] = true;
            if rng.chance(500) {
                side[rng.below(u64::from(N)) as usize] = true;
            }
            Some(Fault::Partition(side))
        }
        10..=12 if partitioned => Some(Fault::Heal),
        _ => None,
    }
}

/// The group service of a node that was declared failed and rejoins: new,
/// following the registry it followed; told it replaces the old one
/// (`GroupService::rejoined`, as mcastd since 2026-11-29) if `told`.
/// `as_before`: it takes the registry over as before 2026-11-29
/// (`GroupService::registry_takeover_as_before`), for replays.
pub fn rejoined_service(
    node: NodeId,
    registry: (NodeId, u32),
    told: bool,
    as_before: bool,
) -> GroupService {
    let mut svc = GroupService::new(node, 1, Limits::default());
    svc.set_cluster(&cluster());
    if as_before {
        svc.registry_takeover_as_before();
    }
    svc.adopt_registry(registry.0, registry.1);
    svc.confirm_registry();
    if told {
        svc.rejoined();
    }
    svc
}
