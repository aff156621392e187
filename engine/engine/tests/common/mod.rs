//! Shared test code: the namespace topology and the run scenario, generic
//! over the transport. They moved into the library (`mcast_engine::harness`)
//! so that `mcast-bench xdp` runs the same code; the tests keep their paths.
#[allow(
    unused_imports,
    reason = "each test binary uses a different part (memory.rs only the scenario)"
)]
pub use mcast_engine::harness::{netns, runs, scenario};

use mcast_engine::{MemoryTransport, Transport};
use mcast_wire::{group_mac, node_mac, Flags, Frame, GroupId, Header, Kind, NodeId, Seq};

/// Writes by hand, into frame `f` of `port`, a DATA frame of node `src`'s
/// stream in `group` (epoch 1): sequence `seq`, `flags`, payload `p`.
/// Returns the frame's length (the tests that forge or malform frames).
#[allow(dead_code, reason = "only the tests that write frames by hand use it")]
pub fn write_data(
    port: &mut MemoryTransport,
    f: u32,
    (group, src): (GroupId, NodeId),
    seq: u32,
    flags: Flags,
    p: &[u8],
) -> usize {
    let buf = port.frame_mut(f);
    let mut h = Header::new(Kind::Data);
    h.flags = flags;
    h.group = group;
    h.src = src;
    h.epoch = 1;
    h.seq = Seq(seq);
    h.payload_len = p.len() as u16;
    buf[58..58 + p.len()].copy_from_slice(p);
    let (_, len) = Frame::emit(
        &mut buf[..],
        group_mac(group),
        node_mac(src),
        mcast_wire::ETHERTYPE_DEFAULT,
        &h,
    )
    .expect("the frame fits");
    len
}
