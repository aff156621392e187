//! The AF_XDP benchmark scenario: on ONE namespace topology in ONE run,
//! 1 sender and 3 receivers on a bridge (see [`crate::harness::netns`]),
//! AF_XDP in SKB mode (copy mode on veth), loss injected at every receiver by
//! the XDP drop-ratio knob.
//!
//! - Throughput, 1 KiB messages, at 0 % and 1 % loss: a raw unreliable
//!   multicast blast (no protocol: the ceiling of this kernel path), MAK
//!   through the engine, a raw unicast blast to one receiver, and Go-Back-N
//!   (the iterative algorithm with one receiver) through the engine.
//!   Performance is read as ratios against the blasts of the same run
//!   (shared/PLATFORM.md: the machine is noisy, absolute figures drift).
//! - One-way latency per message at a fixed offered rate: every namespace
//!   shares CLOCK_MONOTONIC, so the sender writes the message's scheduled
//!   send time into its payload and each receiver subtracts it from its clock
//!   at delivery. Stamping the *scheduled* time (not the time `publish`
//!   returned) counts a late sender against latency instead of hiding it
//!   (coordinated omission).
//!
//! It returns raw figures and latency samples in nanoseconds; the caller
//! (`mcast-bench xdp`) builds histograms and prints. It needs root.
//!
//! Two scenarios share this folder, each in its own module: `xdp` (the
//! throughput and latency runs above, [`run_xdp`]) and `paper` (seed 000
//! §4's comparison, one run at a time, [`paper_run`]). This file keeps what
//! both set up on the topology: the engine specification of a run, the
//! frame counts, and the raw blast's batch. It may not run a scenario itself.
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no protocol state reads this clock"
)]

use std::time::Duration;

use mcast_wire::{
    Flags, Frame, Header, Kind, MacAddr, NodeId, Seq, ETHERTYPE_DEFAULT, FRAME_OVERHEAD,
};

use crate::harness::netns::Topology;
use crate::harness::scenario::{Spec, GROUP, SENDER};
use crate::{Algorithm, Transport, TxDesc};

mod paper;
mod xdp;

pub use paper::{
    paper_frames, paper_run, PaperMode, PaperRaw, PaperRun, ECHO_GROUP, ECHO_REPLY_LEN,
    PAPER_MAX_MESSAGES,
};
pub use xdp::{
    kernel_release, missing_privileges, run_xdp, throughput_run, Environment, Latency, Throughput,
    XdpBenchConfig, XdpReport,
};

/// UMEM frames per socket (a stash of spares about twice the ring slots).
const FRAME_COUNT: u32 = 4096;

/// MAK's window in the throughput runs, and the UMEM of every throughput run
/// (blasts included, so all four use the same transport): twice the window,
/// which leaves the fill ring its frames while a receiver's reorder buffer
/// is full. See `spec` for why the window is this large.
const THROUGHPUT_MAK_WINDOW: u32 = 4096;

const THROUGHPUT_FRAMES: u32 = 2 * THROUGHPUT_MAK_WINDOW;

/// The blast receivers' busy-poll before sleeping: the engine's `spin` in
/// the throughput runs (`harness::scenario::config`).
const BLAST_SPIN: Duration = Duration::from_micros(10);

/// Writes up to `want` raw data frames of `len` bytes (sequence numbers from
/// `first`) and hands them to the transport as one batch; returns how many
/// it took (the rest go back to the pool).
fn send_blast_batch<T: Transport>(
    t: &mut T,
    batch: &mut Vec<TxDesc>,
    dst: MacAddr,
    src: MacAddr,
    first: usize,
    want: usize,
    len: usize,
) -> usize {
    batch.clear();
    while batch.len() < want {
        let Some(f) = t.alloc() else { break };
        let buf = t.frame_mut(f);
        let mut h = Header::new(Kind::Data);
        h.flags = Flags::WHOLE;
        h.group = GROUP;
        h.src = SENDER;
        h.seq = Seq((first + batch.len()) as u32);
        h.payload_len = len as u16;
        buf[FRAME_OVERHEAD..FRAME_OVERHEAD + len].fill(0x5a);
        let (_, flen) = Frame::emit(&mut buf[..], dst, src, ETHERTYPE_DEFAULT, &h).expect("emit");
        batch.push(TxDesc {
            frame: f,
            len: flen as u32,
        });
    }
    let n = t.transmit(batch, false).expect("transmit");
    for d in &batch[n..] {
        t.release(d.frame);
    }
    n
}

fn spec(
    topo: &Topology,
    algorithm: Algorithm,
    receivers: usize,
    messages: usize,
    len: usize,
    loss: f64,
) -> Spec {
    Spec {
        algorithm,
        messages,
        loss,
        receivers: topo
            .receivers
            .iter()
            .take(receivers)
            .enumerate()
            .map(|(i, r)| (11 + i as NodeId, r.mac))
            .collect(),
        // MAK's window must outlast a repair (NAK backoff, repair, ACK) at the
        // rate veth sustains here: 512 frames gave 0.58 of the lossless
        // goodput at 1 % loss, 2,048 about 0.7 (half the default UMEM). The
        // throughput runs use THROUGHPUT_MAK_WINDOW (`protocol`).
        window_frames: if algorithm == Algorithm::Iterative {
            128
        } else {
            2048
        },
        fence: false,
        deadline: Duration::from_secs(300),
        fixed_len: Some(len),
        tuning: Default::default(),
    }
}

/// Bytes 0..8 of a latency message: its index; 8..16: its scheduled send
/// time (CLOCK_MONOTONIC ns). Needs 16 bytes at least.
const STAMP_LEN: usize = 16;
