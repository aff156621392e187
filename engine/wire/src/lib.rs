//! Frame layout of the reliable-multicast engine.
//!
//! Every frame is an Ethernet II frame with our EtherType, a fixed 44-byte header
//! and a payload. This crate gives typed, zero-copy views over byte buffers
//! ([`Frame`]), an owned parsed form of the header ([`Header`]), the NAK range
//! list ([`RangeList`]), batched payloads ([`batch`]), serial-number arithmetic ([`Seq`]) and the MAC
//! addresses of groups and nodes. It performs no I/O and never allocates; once
//! [`Frame::new_checked`] succeeds no accessor panics. `docs/protocol.md` is the
//! specification these types implement.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod batch;
mod error;
mod frame;
mod mac;
mod nak;
mod seq;

pub use error::WireError;
pub use frame::{
    field, payload_crc, Flags, Frame, Header, Kind, ETH_HEADER_LEN, HEADER_LEN, VERSION,
};
pub use mac::{group_mac, node_mac, MacAddr};
pub use nak::{RangeList, SeqRange, MAX_NAK_RANGES, RANGE_LEN};
pub use seq::Seq;

/// The default EtherType: 0x88B5, IEEE 802 "local experimental ethertype 1".
pub const ETHERTYPE_DEFAULT: u16 = 0x88B5;

/// Bytes in front of the payload: the Ethernet header plus our header.
pub const FRAME_OVERHEAD: usize = ETH_HEADER_LEN + HEADER_LEN;

/// The largest payload that fits in one frame for an interface MTU (the MTU
/// counts from the EtherType's end, as Linux does, so it excludes the 14-byte
/// Ethernet header).
pub const fn max_payload_for_mtu(mtu: usize) -> usize {
    mtu.saturating_sub(HEADER_LEN)
}

/// A node's identifier, unique in the cluster. 0 is reserved ("nobody").
pub type NodeId = u32;

/// A group's number, assigned by the registry. Its MAC is [`group_mac`].
pub type GroupId = u32;
