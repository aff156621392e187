//! What the failure simulations share (`failures.rs`, `datapath.rs`): the
//! cluster, a fresh daemon's group service and liveness, the generator and
//! the kinds of fault a run injects.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use mcast_groups::detector::DetectorConfig;
use mcast_groups::liveness::Liveness;
use mcast_groups::{GroupService, Limits, NodeId};

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
