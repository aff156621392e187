//! Every algorithm behind one interface, chosen at run time: what the simulator,
//! the engine and the bench drive.

use core::fmt;
use core::str::FromStr;

use crate::ack::{AckConfig, AckReceiver, AckSender};
use crate::gbn::{GbnConfig, GbnReceiver};
use crate::iterative::IterativeSender;
use crate::mak::{MakConfig, MakReceiver, MakSender};
use crate::nak::{NakConfig, NakReceiver, NakSender};
use crate::{
    Counters, Endpoint, Event, Instant, OutFrame, RxBody, SendError, Sender, StreamConfig, Transmit,
};
use mcast_wire::{Header, NodeId, Seq};

/// A reliable-multicast algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// MAK: multicast, NAKs after random timers with suppression, ACKs per window (seed 000 §3).
    Mak,
    /// Multicast, every receiver ACKs every frame (seed 000 §2 (2)).
    Ack,
    /// Multicast, unicast NAKs without suppression and no ACKs (seed 000 §2 (3)).
    Nak,
    /// Go-Back-N unicast to each receiver in turn (seed 000 §2 (1)).
    Iterative,
}

impl Algorithm {
    /// Every algorithm, in the order the paper presents them.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Iterative,
        Algorithm::Ack,
        Algorithm::Nak,
        Algorithm::Mak,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Mak => "mak",
            Algorithm::Ack => "ack",
            Algorithm::Nak => "nak",
            Algorithm::Iterative => "iterative",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown algorithm {s:?}: expected one of mak, ack, nak, iterative")
            })
    }
}

/// The configuration of every algorithm; each endpoint reads its own part.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProtocolConfig {
    pub mak: MakConfig,
    pub ack: AckConfig,
    pub nak: NakConfig,
    pub gbn: GbnConfig,
}

/// The sender of any algorithm. Variants differ in size; an endpoint is built
/// once per stream and never moved on the per-frame path, so none is boxed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnySender {
    Mak(MakSender),
    Ack(AckSender),
    Nak(NakSender),
    Iterative(IterativeSender),
}

/// The receiver of any algorithm (see [`AnySender`] on variant sizes).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnyReceiver {
    Mak(MakReceiver),
    Ack(AckReceiver),
    Nak(NakReceiver),
    Iterative(GbnReceiver),
}

impl AnySender {
    pub fn new(
        algo: Algorithm,
        stream: StreamConfig,
        cfg: &ProtocolConfig,
        members: &[NodeId],
    ) -> AnySender {
        match algo {
            Algorithm::Mak => AnySender::Mak(MakSender::new(stream, cfg.mak, members)),
            Algorithm::Ack => AnySender::Ack(AckSender::new(stream, cfg.ack, members)),
            Algorithm::Nak => AnySender::Nak(NakSender::new(stream, cfg.nak, members)),
            Algorithm::Iterative => {
                AnySender::Iterative(IterativeSender::new(stream, cfg.gbn, members))
            }
        }
    }
}

impl AnyReceiver {
    pub fn new(algo: Algorithm, stream: StreamConfig, cfg: &ProtocolConfig) -> AnyReceiver {
        match algo {
            Algorithm::Mak => AnyReceiver::Mak(MakReceiver::new(stream, cfg.mak)),
            Algorithm::Ack => AnyReceiver::Ack(AckReceiver::new(stream, cfg.ack)),
            Algorithm::Nak => AnyReceiver::Nak(NakReceiver::new(stream, cfg.nak)),
            Algorithm::Iterative => AnyReceiver::Iterative(GbnReceiver::new(stream, cfg.gbn)),
        }
    }
}

macro_rules! delegate {
    ($self:ident, $e:ident => $body:expr) => {
        match $self {
            Self::Mak($e) => $body,
            Self::Ack($e) => $body,
            Self::Nak($e) => $body,
            Self::Iterative($e) => $body,
        }
    };
}

macro_rules! endpoint_by_delegation {
    ($t:ty) => {
        impl Endpoint for $t {
            fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
                delegate!(self, e => e.handle_frame(now, header, body))
            }
            fn handle_timeout(&mut self, now: Instant) {
                delegate!(self, e => e.handle_timeout(now))
            }
            fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
                delegate!(self, e => e.poll_transmit(now))
            }
            fn poll_event(&mut self) -> Option<Event> {
                delegate!(self, e => e.poll_event())
            }
            fn poll_timeout(&self) -> Option<Instant> {
                delegate!(self, e => e.poll_timeout())
            }
            fn counters(&self) -> &Counters {
                delegate!(self, e => e.counters())
            }
            fn held_buffers(&self) -> usize {
                delegate!(self, e => e.held_buffers())
            }
            fn next_expected(&self) -> Option<Seq> {
                delegate!(self, e => Endpoint::next_expected(e))
            }
            fn group_rtt(&self) -> Option<crate::Duration> {
                delegate!(self, e => e.group_rtt())
            }
            fn release_all(&mut self) {
                delegate!(self, e => e.release_all())
            }
            fn set_tree(&mut self, tree: Option<&crate::FeedbackTree>) {
                delegate!(self, e => e.set_tree(tree))
            }
            fn keeps_copies(&self) -> bool {
                delegate!(self, e => e.keeps_copies())
            }
        }
    };
}

endpoint_by_delegation!(AnySender);
endpoint_by_delegation!(AnyReceiver);

impl Sender for AnySender {
    fn send(&mut self, now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        delegate!(self, e => e.send(now, frame))
    }
    fn can_send(&self) -> bool {
        delegate!(self, e => e.can_send())
    }
    fn is_idle(&self) -> bool {
        delegate!(self, e => e.is_idle())
    }
    fn set_members(&mut self, now: Instant, members: &[NodeId]) {
        delegate!(self, e => e.set_members(now, members))
    }
    fn unresponsive(&self, after: u32, out: &mut Vec<NodeId>) {
        delegate!(self, e => e.unresponsive(after, out))
    }
    fn resume_point(&mut self, now: Instant, member: NodeId) -> Option<Seq> {
        delegate!(self, e => e.resume_point(now, member))
    }
    fn join_point(&self) -> Option<Seq> {
        delegate!(self, e => e.join_point())
    }
    fn acked_until(&self) -> Option<Seq> {
        delegate!(self, e => e.acked_until())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_roundtrip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert!("tcp"
            .parse::<Algorithm>()
            .unwrap_err()
            .contains("expected one of"));
    }
}
