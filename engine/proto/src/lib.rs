//! Sans-IO state machines of the reliable-multicast engine.
//!
//! Each machine takes `(time, input)` and produces frames to send, events
//! (in-order deliveries, released buffers) and the next deadline. It performs no
//! I/O, reads no clock and draws no entropy of its own: time is an argument and
//! randomness comes from a seeded [`Rng`] in its configuration. The same code
//! therefore runs over AF_XDP, over a raw socket and inside the simulator.
//!
//! Payloads are never owned here: a data frame is a [`BufId`], a handle to a
//! buffer the driver owns (a UMEM frame, later). Every `BufId` handed to a
//! machine comes back exactly once, as [`Event::Deliver`] or [`Event::Release`].
//!
//! The machines: [`mak`] (seed 000 §3, the product), the baselines of seed 000 §2
//! ([`ack`], [`nak`], [`iterative`]) and Go-Back-N unicast ([`gbn`], seed 001
//! §4.2.1). [`any`] wraps them behind one interface.
#![forbid(unsafe_code)]

pub mod ack;
pub mod any;
mod api;
pub mod frag;
pub mod gbn;
pub mod iterative;
pub mod mak;
pub mod nak;
mod recv;
pub mod relay;
mod rng;
pub mod rtt;
mod time;
pub mod tree;
pub mod window;

pub use api::{
    stream_of, BufId, Counters, Dest, Endpoint, Event, OutFrame, RxBody, SendError, Sender,
    StreamConfig, Transmit, TxBody,
};
pub use mcast_wire::{Flags, GroupId, Header, Kind, NodeId, RangeList, Seq, SeqRange};
pub use rng::Rng;
pub use rtt::{RtoConfig, RttEstimator};
pub use time::{Duration, Instant};
pub use tree::FeedbackTree;
