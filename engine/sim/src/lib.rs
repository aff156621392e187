//! A deterministic simulator of the reliable-multicast engine on one Ethernet
//! segment (seed 000: one sender, N receivers), in the manner of TigerBeetle's
//! VOPR.
//!
//! A run drives the sans-IO machines of `mcast-proto` (any [`Algorithm`], or
//! any [`Sender`] / [`Endpoint`] through [`run_with`]) over a simulated
//! segment in virtual time that jumps from event to event. Frames are real
//! bytes built by `mcast-wire` and checked by its CRC32C on arrival. Each
//! node's NIC serializes its frames at the link's rate; every copy then
//! arrives after the latency plus random jitter, unless the faults lose,
//! duplicate or corrupt it, or a partition cuts its node off. All randomness
//! comes from one `u64` seed: the same [`SimConfig`] gives the same run, step
//! for step, and a failure prints the command that replays it.
//!
//! With [`SimConfig::batch`] the sender's application packs small whole
//! messages into shared DATA frames as the engine's send queue does (flag
//! `BATCH`, records `u16 len | bytes`, `mcast_wire::batch`); the machines see
//! only frames.
//!
//! After every step the checkers verify that each receiver delivers exactly
//! the sender's messages, in order, once, byte-identical (a batched frame
//! record by record); that every machine stays within its window; and that
//! every buffer is owned by exactly one party. Once the faults stop, algorithms that promise it must complete within
//! [`SimConfig::liveness_bound`].
//!
//! It performs no I/O, reads no clock, spawns no thread and draws no entropy:
//! time is virtual and every random choice comes from the seed. It is for
//! tests and benchmarks, never for carrying real traffic.
#![forbid(unsafe_code)]

mod config;
mod content;
mod pool;
mod report;
mod sim;
pub mod sweep;
pub mod topology;

pub use config::{guarantees_completion, Faults, LinkConfig, Partition, Retree, SimConfig, SENDER};
pub use content::{fill_message, message, message_len};
pub use mcast_proto::any::{Algorithm, ProtocolConfig};
pub use report::{SimFailure, SimReport, StopReason, WireStats};
pub use sim::run_with;

use mcast_proto::any::{AnyReceiver, AnySender};
use mcast_proto::{Endpoint, Sender};

/// Runs `cfg` with the endpoints of `cfg.algorithm`.
pub fn run(cfg: &SimConfig) -> Result<SimReport, SimFailure> {
    run_with(
        cfg,
        |stream, members| AnySender::new(cfg.algorithm, stream, &cfg.protocol, members),
        |stream| AnyReceiver::new(cfg.algorithm, stream, &cfg.protocol),
    )
}

// `run_with` accepts any machine; these keep the normal instantiation honest.
const _: fn() = || {
    fn is_sender<S: Sender>() {}
    fn is_endpoint<E: Endpoint>() {}
    is_sender::<AnySender>();
    is_endpoint::<AnyReceiver>();
};
