//! MAK reliable multicast (seed 000 §3): the product's protocol.
//!
//! The sender multicasts data and keeps every unacknowledged frame by handle.
//! Receivers detect gaps, wait a random time, and multicast a NAK listing what
//! is still missing after removing whatever another receiver already NAKed or
//! the sender already repaired (the paper's `nak[2,4,5]` becoming `nak[1,5]`).
//! ACKs flow only when the sender asks: when its buffer fills (the paper), at a
//! watermark before that (our extension, so the window keeps sliding), and
//! once the sender has been idle for a while ([`TailPolicy::Advertise`], the
//! default; the paper asks at the last frame of every burst,
//! [`TailPolicy::AckLast`]). While it is idle with data unacknowledged, the
//! sender advertises its position (HEARTBEAT frames naming its highest frame),
//! so a receiver that lost the tail NAKs it without any ACK round.
//!
//! Beyond the paper, each configurable and explained in docs/protocol.md:
//! - ACK requests at a watermark ([`MakConfig::ack_watermark_percent`]);
//! - position advertisements instead of an ACK round per burst
//!   ([`MakConfig::tail`]);
//! - NAK timers derived from a measured group round-trip time and the group
//!   size, with the truncated-exponential backoff of RFC 5740 §5.5 / RFC 5401
//!   ([`NakTimer::Adaptive`]);
//! - a retransmission budget ([`MakConfig::retransmit_share`]) so a NAK storm
//!   cannot take more than a set share of the sender's rate;
//! - a repair hold-off: NAKs for a frame repaired less than one GRTT ago are
//!   answered by that repair already ("one repair per NAK round");
//! - an ACK-wait timer that follows the link (the paper's is a fixed time):
//!   each member's round trip is estimated as in RFC 6298 from the echoed
//!   stamps of its ACKs ([`crate::rtt`]), the timer runs from the moment the
//!   request actually leaves, waits the slowest member's timeout plus one NAK
//!   backoff window, and doubles while no ACK at all comes back.
//!
//! The module, by concern (each file says what it owns and may not touch):
//! - this file: the map, and what both sides read: [`MakConfig`] and
//!   [`NakTimer`] (receivers draw their NAK timers from it; the sender's ACK
//!   wait includes one NAK window);
//! - `sender`: [`MakSender`] and [`SenderState`];
//! - `receiver`: [`MakReceiver`] and [`ReceiverState`];
//! - `tests`: the unit tests of both, driven by hand;
//! - `tail_tests`: the same for the idle sender's tail ([`TailPolicy`]);
//! - `feedback`: a receiver's place in the feedback tree (docs/protocol.md
//!   §3.4): its round, its downstream neighbours' reports, its polls;
//! - `tree_tests`: the sender's side of the tree, driven by hand.
//!
//! Owns: the configuration and the public paths `mak::*`. May not touch:
//! either machine's state (the two sides share no state, only frames).

mod feedback;
mod receiver;
mod sender;

pub use receiver::{MakReceiver, ReceiverState};
pub use sender::{MakSender, SenderState};

use crate::rtt::RtoConfig;
use crate::Duration;
#[cfg(doc)]
use crate::FeedbackTree;
use mcast_wire::MAX_NAK_RANGES;

/// How a receiver draws its NAK timer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NakTimer {
    /// Uniform in `[min, max]`: the paper's "random waiting time".
    Fixed { min: Duration, max: Duration },
    /// Truncated exponential over `[0, T]` with `T = factor × GRTT × s(N)`
    /// clamped to `[min, max]`, skewed by the group size N (RFC 5740 §5.5):
    /// with many receivers most wait close to `T` and a few fire early, so the
    /// early NAK suppresses the rest. `s(N) = min(1, ln N / ln full_group)`:
    /// the wait exists to suppress other receivers' NAKs for the same loss, of
    /// which a group of N can send at most N − 1, so small groups wait less and
    /// a single receiver NAKs at once.
    Adaptive {
        factor: f64,
        min: Duration,
        max: Duration,
        full_group: u16,
    },
}

impl NakTimer {
    /// The longest a receiver waits before it NAKs, for a group round trip
    /// `grtt` and `group_size` receivers.
    pub fn window(&self, grtt: Duration, group_size: u16) -> Duration {
        match *self {
            NakTimer::Fixed { max, .. } => max,
            NakTimer::Adaptive {
                factor,
                min,
                max,
                full_group,
            } => {
                let n = f64::from(group_size.max(1));
                let full = f64::from(full_group.max(2));
                let scale = (n.ln() / full.ln()).min(1.0);
                grtt.mul_f64(factor * scale).clamp(min, max.max(min))
            }
        }
    }
}

/// How the sender makes sure that every receiver learns of a burst's last
/// frame, which no later frame reveals if it is lost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TailPolicy {
    /// The paper (seed 000 §3): the last frame of every burst carries LAST and
    /// ACK_REQ, and every receiver ACKs it. Paced traffic makes every message
    /// a burst, so every receiver ACKs every message: kept for the bench's
    /// comparison.
    AckLast,
    /// Once no frame has left for `first_grtts` × GRTT while frames are
    /// unacknowledged, the sender multicasts a HEARTBEAT naming its highest
    /// frame sent, then again after twice the interval each time (a receiver
    /// that lost the tail NAKs it, as for any gap). Once the sender has been
    /// idle for `clamp(idle_ack_grtts × GRTT, idle_ack_min, idle_ack_max)`,
    /// one ACK round (an ACK_REQ frame) frees the buffer, and the heartbeats
    /// stop: the ACK-wait timer's resends take over. Other ACK rounds come
    /// only from the watermark and a full buffer, so their number does not
    /// grow with the message rate.
    Advertise {
        first_grtts: u32,
        idle_ack_grtts: u32,
        idle_ack_min: Duration,
        idle_ack_max: Duration,
    },
}

impl TailPolicy {
    /// The default: advertise after 2 GRTTs (NORM's CMD(FLUSH) interval,
    /// RFC 5740 §5.1.2), one ACK round after 16 GRTTs of idleness but not
    /// before 1 ms nor after 100 ms.
    pub const ADVERTISE: TailPolicy = TailPolicy::Advertise {
        first_grtts: 2,
        idle_ack_grtts: 16,
        idle_ack_min: Duration::from_millis(1),
        idle_ack_max: Duration::from_millis(100),
    };
}

/// Configuration of MAK. The window is the stream's `window_frames` (the
/// paper's equal sender and receiver buffers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MakConfig {
    /// Ask for ACKs each time this percentage of the window has been sent since
    /// the last request. 0 asks only when the buffer is full (the paper).
    pub ack_watermark_percent: u8,
    /// How receivers learn of a lost tail, and when an idle sender asks for ACKs.
    pub tail: TailPolicy,
    /// The WAIT timer (seed 000 §3.2 sender state (2)): how long the sender
    /// waits for every ACK of a request before it resends the last frame and
    /// asks again. Measured (module docs): the slowest member's RFC 6298
    /// timeout plus one NAK window, within these bounds; `initial` for a
    /// member not measured yet. [`RtoConfig::fixed`] is the paper's fixed time.
    pub ack_wait: RtoConfig,
    /// How receivers draw the NAK timer.
    pub nak_timer: NakTimer,
    /// The group round-trip time assumed until the sender has measured one.
    pub initial_grtt: Duration,
    /// Bounds on the measured group round-trip time.
    pub grtt_min: Duration,
    pub grtt_max: Duration,
    /// After NAKing (or hearing a NAK for) a frame, a receiver waits this many
    /// GRTTs for the repair before it NAKs the frame again.
    pub repair_wait_grtts: u32,
    /// The sender answers NAKs for a frame it repaired less than this many
    /// GRTTs ago with that repair (one repair per NAK round).
    pub repair_holdoff_grtts: u32,
    /// Retransmissions may be at most this share of the frames the sender puts
    /// on the wire: each original frame earns `share / (1 - share)` tokens (1
    /// at the default 0.5) and a repair costs one. 0 (or 1 and more) disables
    /// the budget.
    pub retransmit_share: f64,
    /// Tokens the budget can save up from the floor rate while the sender is
    /// idle (the largest repair burst after a pause). Tokens earned by original
    /// frames are kept up to a whole window, since the repairs of a window's
    /// losses are due while that window is outstanding.
    pub retransmit_burst: u32,
    /// Tokens added per second whatever the sending rate, so repairs go out
    /// when the sender is idle (a lost tail).
    pub retransmit_floor_per_sec: u32,
    /// Ranges in one NAK (at most [`MAX_NAK_RANGES`]).
    pub max_nak_ranges: usize,
    /// Children a node of the feedback tree (seed 004 §2.1) has (2: the
    /// seed's binary tree), when the driver installs one
    /// ([`crate::Endpoint::set_tree`]); 0, the default for now, installs
    /// none: every receiver ACKs the sender itself (the paper). Not the
    /// default: with local recovery ([`MakConfig::near_repairs`]) it costs
    /// 3 % of the throughput at 512 receivers and 1 % loss in saturation,
    /// but at a few receivers it saves the sender nothing and adds a hop to
    /// every ACK round (docs/benchmarks.md).
    pub tree_fanout: u16,
    /// The tree is widened (a larger fanout) until it is at most this many
    /// levels deep (0: never widened): each level adds a hop to every ACK
    /// round, which the window must cover ([`FeedbackTree::fanout_for`]).
    pub tree_max_depth: u8,
    /// Local recovery over the feedback tree (docs/protocol.md §3.5): with a
    /// tree installed, a receiver first asks one tree neighbour for what it
    /// misses, which repairs it from its copy; only what that neighbour
    /// cannot repair is NAKed to the group (and so to the sender). On by
    /// default; off, every NAK goes to the group (the paper).
    pub near_repairs: bool,
}

impl Default for MakConfig {
    fn default() -> Self {
        MakConfig {
            ack_watermark_percent: 50,
            tail: TailPolicy::ADVERTISE,
            ack_wait: RtoConfig {
                initial: Duration::from_micros(500),
                min: Duration::from_micros(200),
                max: Duration::from_secs(1),
            },
            nak_timer: NakTimer::Adaptive {
                factor: 2.0,
                min: Duration::from_micros(2),
                max: Duration::from_millis(50),
                full_group: 64,
            },
            initial_grtt: Duration::from_micros(100),
            grtt_min: Duration::from_micros(5),
            grtt_max: Duration::from_millis(100),
            repair_wait_grtts: 3,
            repair_holdoff_grtts: 1,
            retransmit_share: 0.5,
            retransmit_burst: 128,
            retransmit_floor_per_sec: 200_000,
            max_nak_ranges: MAX_NAK_RANGES,
            tree_fanout: 0,
            tree_max_depth: 4,
            near_repairs: true,
        }
    }
}

#[cfg(test)]
mod near_tests;
#[cfg(test)]
mod tail_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_tests;
