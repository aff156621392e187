//! Shared-memory IPC between the daemon `mcastd` and local applications.
//!
//! - [`ring`]: the lock-free SPSC byte ring that carries messages, one per
//!   direction per client, in a sealed memfd both sides map; records move
//!   one at a time or many per publication of an index.
//! - [`proto`]: the control messages (JSON over a `SOCK_SEQPACKET` Unix
//!   socket): requests, responses, notices.
//! - [`server`]: the daemon's side: accepts clients, checks credentials,
//!   creates their rings and eventfds, decodes requests. Non-blocking, driven
//!   by the daemon's poll loop.
//! - [`client`]: what applications link: connect, join, publish, receive,
//!   one message or a batch per call.
//! - [`batch`]: a batched frame's messages in one subscription record.
//! - [`scatter`]: a scattering's parts in one record (total-order groups).
//! - [`trace`]: per-hop latencies, with tracing on.
//! - [`shm`] and [`sys`]: memfd/mmap and the syscalls. The only modules with
//!   unsafe code; everything else denies it.
#![deny(unsafe_code)]

pub mod batch;
pub mod client;
pub mod proto;
pub mod ring;
pub mod scatter;
pub mod server;
pub mod shm;
pub mod sys;
pub mod trace;

pub use client::{Client, Error, Membership, Message, MessageKind, MessageRef};
pub use proto::{ErrorCode, Member, Notice, Request, Response, View};
pub use ring::{Consumer, Producer, PushError, Record, RecordHeader};
pub use server::{Access, ClientId, RingSizes, Server, ServerEvent};
