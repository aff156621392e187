//! The interface every machine shares: inputs, outputs, ownership of buffers and
//! counters.

use crate::{Instant, Rng};
use mcast_wire::{Flags, GroupId, Header, Kind, NodeId, RangeList, Seq};

/// A handle to a payload buffer owned by the driver (a UMEM frame index, a slab
/// slot in the simulator). The protocol core never sees the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// To the group's multicast MAC: every member (and the sender) hears it.
    Group,
    /// To one node's MAC.
    Node(NodeId),
}

/// What follows the header of a frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxBody {
    /// No payload (a plain ACK, ACK_REQ, Pack, Nack, HEARTBEAT).
    None,
    /// The payload already sits in this buffer, after room for the headers. The
    /// machine keeps owning it (it is a retransmission buffer) unless it says
    /// otherwise with [`Event::Release`].
    Buf(BufId),
    /// A range list, to be written as the payload: a NAK's missing frames,
    /// or the nodes a merged ACK covers (docs/protocol.md §3.4). Boxed: both
    /// are rare, and every data frame's `Transmit` stays small on the hot path.
    Ranges(Box<RangeList>),
    /// A repair from the driver's own copy of frame `seq` of the stream
    /// named in `header.peer` ([`crate::relay::RelayCache`], filled as the
    /// driver hands received frames to a machine whose
    /// [`Endpoint::keeps_copies`] is true): the driver writes the copy's
    /// payload, sets `payload_len` and adds the copy's kept flags
    /// ([`crate::relay::KEPT_FLAGS`]). A driver without the copy (evicted, or never
    /// received) sends nothing and counts it; the asker then asks the
    /// group (docs/protocol.md §3.5).
    Relay(Seq),
}

/// A frame the driver must send. `header.payload_len` is already set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub dest: Dest,
    pub header: Header,
    pub body: TxBody,
}

/// The payload of a received frame, as handed to a machine.
#[derive(Debug, Clone, Copy)]
pub enum RxBody<'a> {
    /// A control frame without a payload.
    None,
    /// A data frame whose payload sits in `buf`. Ownership passes to the machine,
    /// which returns it exactly once, as [`Event::Deliver`] or [`Event::Release`].
    Data(BufId),
    /// A range list, parsed by the driver: a NAK's missing frames, or the
    /// nodes a merged ACK covers (an ACK with a payload).
    Ranges(&'a RangeList),
}

/// What a machine tells its driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The next frame of the stream from `stream`, in order, exactly once. The
    /// buffer now belongs to the application (the driver frees it after use).
    Deliver {
        stream: NodeId,
        seq: Seq,
        buf: BufId,
        len: u16,
        flags: Flags,
    },
    /// The machine no longer needs this buffer: the driver may reuse it.
    Release(BufId),
}

/// One frame of a message, handed to a sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutFrame {
    pub buf: BufId,
    /// Payload bytes in `buf`.
    pub len: u16,
    /// Payload flags: [`Flags::FRAG_FIRST`] / [`Flags::FRAG_LAST`] (both for a
    /// whole message), and [`Flags::BATCH`] for several whole messages
    /// (`mcast_wire::batch`).
    pub frag: Flags,
    /// True when nothing else is queued behind this frame: the end of a burst
    /// (MAK flags it LAST and asks for ACKs).
    pub last: bool,
}

/// Why a sender refused a frame. The buffer is handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The window is full: wait for acknowledgments (back-pressure) and retry.
    WindowFull(BufId),
    /// The sender has no receivers to send to.
    NoMembers(BufId),
}

impl SendError {
    /// The refused buffer.
    pub fn buf(self) -> BufId {
        match self {
            SendError::WindowFull(b) | SendError::NoMembers(b) => b,
        }
    }
}

/// What identifies one reliable stream, and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    pub group: GroupId,
    /// This endpoint's node.
    pub local: NodeId,
    /// The node whose data this stream carries (equal to `local` at the sender).
    pub sender: NodeId,
    /// The sender's session epoch: frames of another epoch are dropped and counted.
    pub epoch: u32,
    /// The first sequence number the sender uses.
    pub initial_seq: Seq,
    /// Frames in the window: the sender's retransmission buffer and each
    /// receiver's reorder buffer hold at most this many (seed 000: equal buffers).
    pub window_frames: u32,
    /// Seed of the machine's generator (the random timers). Mixed with `local`,
    /// so receivers configured alike still draw differently.
    pub seed: u64,
}

/// The stream a received frame belongs to: the data sender's node id. Data-like
/// kinds come from the sender; feedback kinds, and a repair relayed by a
/// tree neighbour (DATA flagged NEAR), name it in `peer`.
pub fn stream_of(header: &Header) -> NodeId {
    match header.kind {
        Kind::Data if header.flags.contains(Flags::NEAR) => header.peer,
        Kind::Data | Kind::AckReq | Kind::Heartbeat | Kind::GbnData | Kind::Beat => header.src,
        Kind::Nak | Kind::Ack | Kind::Pack | Kind::Nack => header.peer,
    }
}

/// Counters kept by every endpoint; fields a machine has no use for stay zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Original data frames sent (a frame sent to N receivers one by one counts N).
    pub data_sent: u64,
    /// Data frames sent again.
    pub data_retransmitted: u64,
    /// Data frames received (including duplicates).
    pub data_received: u64,
    /// Frames delivered in order to the application.
    pub delivered: u64,
    /// Data frames received that were already held or delivered.
    pub duplicates_dropped: u64,
    /// Data frames beyond the receive window, dropped.
    pub out_of_window_dropped: u64,
    /// Frames of another session epoch, dropped.
    pub wrong_epoch_dropped: u64,
    /// Frames that failed their checksum (counted by the driver: seed 000 treats them as lost).
    pub checksum_failures: u64,
    /// NAK frames sent.
    pub naks_sent: u64,
    /// NAK timer expiries at which everything missing was already covered, so no NAK went out.
    pub naks_suppressed: u64,
    /// Missing sequence numbers dropped from a NAK because another receiver NAKed them or the repair came.
    pub nak_entries_suppressed: u64,
    /// NAK frames received (by the sender: addressed to it; by receivers: overheard).
    pub naks_received: u64,
    /// NAKed sequence numbers the sender did not resend because it had just repaired them.
    pub repairs_suppressed: u64,
    /// NAKed sequence numbers no longer in the sender's buffer.
    pub naks_unrepairable: u64,
    /// Repairs delayed because the retransmission budget was spent.
    pub repairs_deferred: u64,
    /// Round-trip samples a MAK sender took from NAKs (their echo of the
    /// last data frame's stamp).
    pub nak_rtt_samples: u64,
    /// ACK frames sent / received.
    pub acks_sent: u64,
    pub acks_received: u64,
    /// ACK requests sent (ACK_REQ frames and data frames flagged ACK_REQ) / received.
    pub ack_reqs_sent: u64,
    pub ack_reqs_received: u64,
    /// Position advertisements (MAK's HEARTBEAT frames) sent / received.
    pub adverts_sent: u64,
    pub adverts_received: u64,
    /// Go-Back-N positive and negative acknowledgments.
    pub packs_sent: u64,
    pub packs_received: u64,
    pub nacks_sent: u64,
    pub nacks_received: u64,
    /// Entries into the Stall state (GBN sender and receiver) or MAK's WAIT state.
    pub stalls: u64,
    /// Retransmission or ACK-wait timer expiries.
    pub timeouts: u64,
    /// Sends refused because the window was full.
    pub window_full: u64,
    /// Frames from a node that is not a member, or malformed for their kind, dropped.
    pub rejected: u64,
    /// ACKs a member's receive stream sent before the member joined the send
    /// stream or opened it again (the stream it had before), ignored.
    pub acks_stale: u64,
    /// Local recovery over the feedback tree (docs/protocol.md §3.5): NAKs
    /// asked of a tree neighbour (not counted in `naks_sent`) / received
    /// by the neighbour.
    pub near_naks_sent: u64,
    pub near_naks_received: u64,
    /// Repairs a receiver sent from its copy to a neighbour that asked /
    /// received from a neighbour.
    pub relays_sent: u64,
    pub relays_received: u64,
}

impl Counters {
    /// Adds every field of `other` to `self`.
    pub fn accumulate(&mut self, other: &Counters) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += other.$f; )* };
        }
        add!(
            data_sent,
            data_retransmitted,
            data_received,
            delivered,
            duplicates_dropped,
            out_of_window_dropped,
            wrong_epoch_dropped,
            checksum_failures,
            naks_sent,
            naks_suppressed,
            nak_entries_suppressed,
            naks_received,
            repairs_suppressed,
            naks_unrepairable,
            repairs_deferred,
            nak_rtt_samples,
            acks_sent,
            acks_received,
            ack_reqs_sent,
            ack_reqs_received,
            adverts_sent,
            adverts_received,
            packs_sent,
            packs_received,
            nacks_sent,
            nacks_received,
            stalls,
            timeouts,
            window_full,
            rejected,
            acks_stale,
            near_naks_sent,
            near_naks_received,
            relays_sent,
            relays_received
        );
    }
}

/// What every machine does: take frames and timeouts, give frames, events and a
/// deadline. The driver calls `handle_*`, then drains `poll_transmit` and
/// `poll_event`, then sleeps until `poll_timeout` or the next frame.
pub trait Endpoint {
    /// A frame of this machine's stream arrived (the driver routes by
    /// [`stream_of`] and has checked the checksum).
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>);
    /// The deadline from [`Endpoint::poll_timeout`] has passed. Calling it early is harmless.
    fn handle_timeout(&mut self, now: Instant);
    /// The next frame to send, if any.
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit>;
    /// The next event, if any.
    fn poll_event(&mut self) -> Option<Event>;
    /// When [`Endpoint::handle_timeout`] must next be called.
    fn poll_timeout(&self) -> Option<Instant>;
    /// The counters.
    fn counters(&self) -> &Counters;
    /// A sender's group round-trip estimate (GRTT: the slowest member's
    /// smoothed round trip), which its receivers' NAK backoff and repair
    /// wait, and its own ACK wait and repair hold-off, derive from. `None`
    /// for machines without one.
    fn group_rtt(&self) -> Option<crate::Duration> {
        None
    }
    /// Buffers this machine holds now (for the driver's conservation checks).
    fn held_buffers(&self) -> usize;
    /// A receiving machine: the sequence number it delivers next (the
    /// frame that, arriving, is delivered at once with the buffered frames
    /// after it). The driver short of buffers keeps that one and drops
    /// frames that would only wait (a repair brings them again). `None`
    /// for senders.
    fn next_expected(&self) -> Option<Seq> {
        None
    }
    /// Shutdown: hands back every buffer the machine still holds, as
    /// [`Event::Release`] (each exactly once), and forgets the stream's state.
    fn release_all(&mut self);
    /// Installs the group's feedback tree (seed 004 §2.1), or removes it
    /// (`None`: feedback goes straight to the sender). Machines without
    /// aggregated feedback ignore it.
    fn set_tree(&mut self, tree: Option<&crate::FeedbackTree>) {
        let _ = tree;
    }
    /// True when this machine may ask its driver to repair a tree
    /// neighbour from a copy ([`TxBody::Relay`]): the driver then keeps a
    /// copy of each data frame it hands to this machine
    /// ([`crate::relay::RelayCache`]). A MAK receiver in a feedback tree.
    fn keeps_copies(&self) -> bool {
        false
    }
}

/// The sending side of a reliable stream.
pub trait Sender: Endpoint {
    /// Queues one frame for reliable delivery to the current members.
    fn send(&mut self, now: Instant, frame: OutFrame) -> Result<Seq, SendError>;
    /// True when [`Sender::send`] would accept a frame now.
    fn can_send(&self) -> bool;
    /// True when every frame sent has been acknowledged by every member (for
    /// algorithms without acknowledgments: when nothing is left to transmit).
    fn is_idle(&self) -> bool;
    /// Every frame before this one has been acknowledged by every member
    /// it was sent to that is still a member (a member added later starts
    /// at or after it). `None`: the algorithm does not know (it takes no
    /// acknowledgments, or does not say).
    fn acked_until(&self) -> Option<Seq> {
        None
    }

    /// Installs a new view: the receivers whose acknowledgments count from now on.
    fn set_members(&mut self, now: Instant, members: &[NodeId]);
    /// Appends the members that left at least `after` of this sender's
    /// acknowledgment requests in a row unanswered, for the driver's
    /// failure detector (a report, not a verdict: a member still repairing
    /// a gap answers late too). Algorithms that do not track members
    /// report none.
    fn unresponsive(&self, after: u32, out: &mut Vec<NodeId>) {
        let _ = (after, out);
    }
    /// Where `member`'s receive stream continues if the member opens it
    /// again (it lost it while this sender kept it as a member): the first
    /// frame it has not acknowledged, which this sender still holds, so
    /// nothing it lacks is skipped. From `now` on, acknowledgments its old
    /// stream sent before no longer count. `None` when the algorithm keeps
    /// no such position or `member` is not one: the driver then removes the
    /// member and adds it again, at the position a new member starts at.
    fn resume_point(&mut self, now: Instant, member: NodeId) -> Option<Seq> {
        let _ = (now, member);
        None
    }
    /// Where a member added now starts: the oldest frame this sender still
    /// holds, so that whatever a member of before may still lack, the new
    /// one receives too and can give it in a flush if this sender dies.
    /// `None` when the algorithm holds no such frames: a new member then
    /// starts at the next frame.
    fn join_point(&self) -> Option<Seq> {
        None
    }
}

/// Common per-machine helper: the header of a frame of this stream.
pub(crate) fn header_for(cfg: &StreamConfig, kind: Kind) -> Header {
    let mut h = Header::new(kind);
    h.group = cfg.group;
    h.src = cfg.local;
    h.peer = if cfg.local == cfg.sender {
        0
    } else {
        cfg.sender
    };
    h.epoch = cfg.epoch;
    h
}

/// Seeds a machine's generator from its configuration and identity, so two
/// receivers with the same seed still draw different timers.
pub(crate) fn rng_for(cfg: &StreamConfig) -> Rng {
    Rng::new(
        cfg.seed
            ^ (u64::from(cfg.local) << 32)
            ^ u64::from(cfg.sender).rotate_left(17)
            ^ u64::from(cfg.group),
    )
}
