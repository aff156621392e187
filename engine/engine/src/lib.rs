//! The polling engine of the reliable-multicast stack: the loop that carries
//! the sans-IO protocol machines of `mcast-proto` over real frames.
//!
//! - [`engine`] holds [`Engine`], one per interface queue and owned by one thread:
//!   RX batches, checksum checks, routing by stream, timers, TX batches,
//!   adaptive waiting, the application API (publish / receive whole messages),
//!   counters, frame conservation and clean shutdown.
//! - [`transport`] holds the [`Transport`] trait and its three implementations:
//!   AF_XDP (the main one), AF_PACKET (fallback and comparison) and an
//!   in-memory segment (tests without privileges).
//! - [`sys`] is the only engine module with `unsafe`: clock, ppoll, CPU pinning,
//!   interface lookups, AF_PACKET syscalls.
//! - [`harness`] builds the real-kernel namespace topology (1 sender, 3
//!   receivers on a bridge) and runs the checked scenario on it (its `netns`
//!   module has the harness's own `unsafe`: setns, capset); shared by
//!   the namespace tests, the examples and `mcast-bench` (needs root).
//! - [`bench`](mod@bench) is the AF_XDP benchmark scenario on that topology: blasts,
//!   MAK and GBN throughput, one-way latency samples.
//!
//! What it never does: it never copies an outgoing payload after the
//! application's one write into a frame (except the iterative baseline to
//! several receivers, which needs a header per receiver), never rewrites a
//! frame in flight, never puts
//! a clock read or I/O inside the protocol core, and never falls back to a
//! slower mode (SKB XDP, copy mode) unless configured to, and then says so.
#![deny(unsafe_code)]

pub mod bench;
pub mod engine;
mod error;
pub mod harness;
pub mod sys;
pub mod transport;

pub use engine::{
    Accept, AuthConfig, Batch, Deliver, Engine, EngineConfig, EngineCounters, EngineStats,
    Fragment, FrameLedger, GroupOptions, GroupStats, Message, RawFrame, SendTally, ShutdownReport,
    StreamStart, MAX_SENDERS,
};
pub use error::{EngineError, PublishError};
pub use mcast_auth as auth;
pub use transport::memory::{MemorySegment, MemoryTransport};
pub use transport::packet::{PacketConfig, PacketTransport};
pub use transport::queues::{ExtraQueue, MultiQueueTransport, QueueStats};
pub use transport::xdp::{XdpConfig, XdpTransport};
pub use transport::{RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};

pub use mcast_proto::any::{Algorithm, ProtocolConfig};
