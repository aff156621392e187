//! What the engine needs from a link: a fixed pool of frames addressed by
//! index, a receive batch, a transmit batch with completions, and a way to
//! sleep until a frame arrives.
//!
//! Three implementations run the same engine code:
//! - [`xdp::XdpTransport`], AF_XDP (`mcast_xsk::XskSocket`, its UMEM and rings)
//!   behind the XDP steering program. The main data path.
//! - [`packet::PacketTransport`], an AF_PACKET raw socket bound to our
//!   EtherType, with its own [`pool::FramePool`] of the same shape. The
//!   fallback where XDP cannot attach, and a comparison point.
//! - [`memory::MemoryTransport`], ports on an in-process [`memory::MemorySegment`],
//!   for fast tests without privileges.
//!
//! A frame index is the `BufId` the protocol machines hold. Every frame is, at
//! the transport's level, `free`, given to the kernel for RX (`fill`), `held`
//! by the engine, or in `tx` (TX ring or completion). A transport never
//! reads or writes a frame the engine holds except when asked, and never hands
//! out a frame it does not own.

pub mod memory;
pub mod packet;
pub mod pool;
pub mod queues;
pub mod xdp;

use std::os::fd::RawFd;
use std::time::Duration;

use mcast_wire::MacAddr;
use mcast_xsk::{AttachedMode, BindMode, SocketStats, SteeringCounters};

use crate::EngineError;

/// A received frame: packet bytes at `offset..offset + len` of frame `frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxDesc {
    pub frame: u32,
    pub offset: u32,
    pub len: u32,
}

/// A frame to send: `len` bytes from the start of frame `frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxDesc {
    pub frame: u32,
    pub len: u32,
}

/// Where a transport's frames are, by its own accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounts {
    pub total: u32,
    pub free: u32,
    /// Given to the kernel for receiving (fill ring, RX ring).
    pub fill: u32,
    /// Held by the engine.
    pub held: u32,
    /// Given to the kernel for sending (TX ring, completion ring).
    pub tx: u32,
}

/// What a transport is and how it is attached, for counters and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportInfo {
    /// "af_xdp", "af_packet" or "memory".
    pub kind: &'static str,
    /// AF_XDP: the mode the steering program is attached in.
    pub attach_mode: Option<AttachedMode>,
    /// AF_XDP: why native attach fell back to SKB mode (AttachMode::Auto only).
    pub attach_fallback: Option<String>,
    /// AF_XDP: copy or zero-copy.
    pub bind_mode: Option<BindMode>,
    /// AF_XDP: set when zero-copy was preferred but the driver refused it.
    pub zero_copy_refused: Option<String>,
}

/// A link the engine drives. Frame indices are stable handles; the engine
/// owns a frame between `recv`/`alloc` and `release`/`transmit`.
pub trait Transport {
    /// What this transport is.
    fn info(&self) -> TransportInfo;
    /// Our interface's MAC (source of every frame we send).
    fn mac(&self) -> MacAddr;
    /// Bytes per frame.
    fn frame_size(&self) -> usize;
    /// Frames in the pool.
    fn frame_count(&self) -> u32;
    /// Starts receiving frames addressed to the group MAC `mac`.
    fn subscribe(&mut self, mac: MacAddr) -> Result<(), EngineError>;
    /// Stops receiving frames addressed to the group MAC `mac`.
    fn unsubscribe(&mut self, mac: MacAddr) -> Result<(), EngineError>;
    /// Appends up to one batch of received frames to `out`; they become held.
    fn recv(&mut self, out: &mut Vec<RxDesc>) -> Result<usize, EngineError>;
    /// Whether frames wait to be received (advisory: the engine stops
    /// sending to read them). A transport that cannot tell says false.
    fn rx_waiting(&self) -> bool {
        false
    }
    /// A free frame for the engine to fill, if any.
    fn alloc(&mut self) -> Option<u32>;
    /// Gives a held frame back to the pool (and the fill ring).
    fn release(&mut self, frame: u32);
    /// The bytes of a held frame. Panics if the frame is not held (an engine bug).
    fn frame(&self, frame: u32) -> &[u8];
    /// The bytes of a held frame, writable. Panics if not held.
    fn frame_mut(&mut self, frame: u32) -> &mut [u8];
    /// Copies bytes `range` of held frame `from` into the same range of held
    /// frame `to`, in one copy. Panics if either is not held (an engine bug).
    fn copy_between(&mut self, from: u32, to: u32, range: std::ops::Range<usize>);
    /// Queues held frames for sending, as many as fit; returns how many. With
    /// `keep`, each comes back held (see [`Transport::reap`]) once sent,
    /// otherwise it returns to the free pool.
    fn transmit(&mut self, batch: &[TxDesc], keep: bool) -> Result<usize, EngineError>;
    /// Processes completions; appends to `kept` the frames sent with `keep`
    /// whose transmission completed (held again).
    fn reap(&mut self, kept: &mut Vec<u32>) -> Result<(), EngineError>;
    /// Sleeps until a frame may be waiting or `timeout` passes.
    fn wait(&mut self, timeout: Duration) -> Result<(), EngineError>;
    /// The descriptor that becomes readable when a frame arrives, for callers
    /// that wait on it together with their own (the daemon's clients). None:
    /// the transport can only be waited on through [`Transport::wait`].
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
    /// More descriptors that become readable when frames wait (the extra
    /// queues' handoffs of [`queues::MultiQueueTransport`]), waited on with
    /// [`Transport::wait_fd`].
    fn extra_wait_fds(&self) -> &[RawFd] {
        &[]
    }
    /// Where the frames are.
    fn counts(&self) -> TransportCounts;
    /// Frames free or given to the kernel for receiving, and all of them,
    /// from the transport's own accounting: cheap enough for every frame
    /// (no read of a ring the kernel writes, unlike `counts`).
    fn spare_frames(&self) -> (u32, u32) {
        let c = self.counts();
        (c.free + c.fill, c.total)
    }
    /// Checks the transport's own ledger (per-frame states against counters).
    fn check_conservation(&self) -> Result<TransportCounts, String>;
    /// TESTING KNOB: drop this fraction of received frames of ours before the
    /// engine sees them (in the XDP program for AF_XDP, in user space otherwise).
    fn set_drop_ratio(&mut self, ratio: f64) -> Result<(), EngineError>;
    /// AF_XDP: the steering program's counters.
    fn steering_counters(&self) -> Option<SteeringCounters> {
        None
    }
    /// AF_XDP: the kernel's counters of the socket (drops after the redirect,
    /// e.g. for want of a fill-ring frame).
    fn socket_stats(&self) -> Option<SocketStats> {
        None
    }
    /// Several queues: the counters of each extra queue's receive thread.
    fn queue_stats(&self) -> Vec<queues::QueueStats> {
        Vec::new()
    }
}

/// The user-space loss knob of the AF_PACKET and memory transports: a
/// deterministic generator against a threshold, as the XDP program does.
#[derive(Debug)]
pub(crate) struct LossKnob {
    rng: mcast_proto::Rng,
    ratio: f64,
    pub dropped: u64,
}

impl LossKnob {
    pub(crate) fn new(seed: u64) -> LossKnob {
        LossKnob {
            rng: mcast_proto::Rng::new(seed),
            ratio: 0.0,
            dropped: 0,
        }
    }

    pub(crate) fn set(&mut self, ratio: f64) -> Result<(), EngineError> {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(EngineError::Config(format!(
                "drop ratio {ratio} is not in 0.0..=1.0"
            )));
        }
        self.ratio = ratio;
        Ok(())
    }

    /// True when this frame is to be dropped.
    pub(crate) fn drop_this(&mut self) -> bool {
        if self.ratio > 0.0 && self.rng.chance(self.ratio) {
            self.dropped += 1;
            return true;
        }
        false
    }
}
